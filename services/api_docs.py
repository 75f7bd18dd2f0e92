"""``GET /docs``: Swagger UI served from the service itself, so it works offline.

FastAPI's default ``/docs`` page loads Swagger UI from a CDN and is blank without
internet access.  Here the assets come from the ``swagger-ui-bundle`` package and are
served under ``/docs/assets``; the page references only relative paths.  ReDoc is not
served (no maintained PyPI package ships its standalone bundle): ``/redoc`` is 404.
Apps must be created with ``docs_url=None, redoc_url=None``.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

ASSETS = "/docs/assets"


def install_docs(app: FastAPI) -> None:
    """Serve Swagger UI at ``/docs`` (for ``app.openapi_url``) with local assets."""
    openapi_url = app.openapi_url or "/openapi.json"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi_url, title=f"{app.title} - API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png")

    app.mount(ASSETS, StaticFiles(directory=swagger_ui_path), name="swagger-ui-assets")
