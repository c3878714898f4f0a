"""taugate admission: the HTTPS server, pure review functions, mutation, validation, policies."""
