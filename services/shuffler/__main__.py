"""``python -m segshuffle.services.shuffler``: serve with settings from the environment."""

from .main import run
from .settings import Settings

if __name__ == "__main__":
    raise SystemExit(run(Settings.from_env()))
