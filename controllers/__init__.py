"""taugate.controllers: the kopf operator (one module per resource), the recorder and its evidence."""

if __name__ != "taugate.controllers":
    raise ImportError(f"import taugate.controllers, not {__name__}: the folder controllers/ installs as "
                      "taugate.controllers (pyproject.toml), and one module has one name")
