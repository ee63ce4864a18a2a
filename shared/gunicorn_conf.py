"""gunicorn settings shared by every function: `gunicorn -c python:agentfn.shared.gunicorn_conf 'MODULE:create_app()'`,
or without the app when AGENTFN_FUNCTION names the function (as each image does)."""

import os

if os.environ.get("AGENTFN_FUNCTION"):
    wsgi_app = f"agentfn.{os.environ['AGENTFN_FUNCTION']}.app:create_app()"
bind = f"{os.environ.get('AGENTFN_BIND', '0.0.0.0')}:{os.environ.get('PORT', '8080')}"
worker_class = "gthread"
workers = int(os.environ.get("AGENTFN_WORKERS", "1"))
threads = int(os.environ.get("AGENTFN_THREADS", "4"))
timeout = int(os.environ.get("AGENTFN_WORKER_TIMEOUT", "120"))
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
    "root": {"level": os.environ.get("AGENTFN_LOG_LEVEL", "INFO").upper(), "handlers": ["stderr"]},
    "loggers": {
        "gunicorn.error": {"level": "INFO", "handlers": ["stderr"], "propagate": False},
    },
}
