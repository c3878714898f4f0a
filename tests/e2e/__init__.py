"""The end-to-end tier: taugate on a real control plane built from Go modules. A package, so that
pytest does not put this folder on sys.path, where platform.py would shadow the standard library's
``platform`` in every process the tests start (the recorder's, spawned by the operator)."""
