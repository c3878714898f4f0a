"""taugate admission: the HTTPS server, pure review functions, mutation, validation, policies."""

if __name__ != "taugate.webhook":
    raise ImportError(f"import taugate.webhook, not {__name__}: the folder webhook/ installs as "
                      "taugate.webhook (pyproject.toml), and one module has one name")
