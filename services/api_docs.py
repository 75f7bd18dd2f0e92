"""``GET /docs`` (Swagger UI) and ``GET /redoc`` (ReDoc), served by the service itself.

FastAPI's default pages load their scripts and fonts from CDNs and are blank without
internet access. Here every asset comes from the ``fastapi-standalone-docs`` package
(Swagger UI's bundle and stylesheet, ReDoc's standalone bundle, the favicon) and is
served under ``/docs/assets``; the pages reference only relative paths on the same
origin, and ReDoc is told not to load Google's fonts. Apps must be created with
``docs_url=None, redoc_url=None``.
"""

from __future__ import annotations

from importlib.resources import files

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

ASSETS = "/docs/assets"
_STATIC = files("fastapi_standalone_docs") / "static"


def install_docs(app: FastAPI) -> None:
    """Serve Swagger UI at ``/docs`` and ReDoc at ``/redoc`` (for ``app.openapi_url``) with
    local assets."""
    openapi_url = app.openapi_url or "/openapi.json"
    title = f"{app.title} - API"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url, title=title,
            swagger_js_url=f"{ASSETS}/swagger/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/fastapi/favicon.png")

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=openapi_url, title=title,
            redoc_js_url=f"{ASSETS}/redoc/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS}/fastapi/favicon.png", with_google_fonts=False)

    app.mount(ASSETS, StaticFiles(directory=str(_STATIC)), name="api-docs-assets")
