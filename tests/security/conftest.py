"""The security suite: attacks on what gtcache trusts (bundles, stores, the index, the CLI,
other users), and the figures they measured (the session fixture ``figures`` of tests/conftest.py,
written to build/ at the end)."""
