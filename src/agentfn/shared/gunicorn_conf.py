"""gunicorn settings shared by every function: `gunicorn -c python:agentfn.shared.gunicorn_conf 'MODULE:create_app()'`,
or without the app when AGENTFN_FUNCTION names the function (as each image does)."""

from agentfn.shared.server import ServerSettings

settings = ServerSettings.from_env()
if settings.function:
    wsgi_app = f"agentfn.{settings.function}.app:create_app()"
bind = f"{settings.bind}:{settings.port}"
worker_class = "gthread"
workers = settings.workers
threads = settings.threads
timeout = settings.worker_timeout
graceful_timeout = 10
keepalive = 5
accesslog = None  # the app writes one JSON line per request itself
control_socket_disable = True  # one per host path: replicas and the dev stack would share it
errorlog = "-"
logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "agentfn.shared.logs.JsonFormatter"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}},
    "root": {"level": settings.log_level, "handlers": ["stderr"]},
    "loggers": {
        "gunicorn.error": {"level": "INFO", "handlers": ["stderr"], "propagate": False},
    },
}
