"""taugate.certs: the CA and serving certificates, rotation, caBundle publication, hot reload."""

if __name__ != "taugate.certs":
    raise ImportError(f"import taugate.certs, not {__name__}: the folder certs/ installs as "
                      "taugate.certs (pyproject.toml), and one module has one name")
