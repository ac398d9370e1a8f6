"""The reliability suite: tests that attack the store, and the figures they measured.

Each test adds its figures with the session fixture ``figures`` (tests/conftest.py):
``figures.add(section, what, value)``; the session prints them as a table at the
end and writes them to ``build/reliability-figures.md`` (``make reliability``
copies that table into ``docs/recorded/`` for docs/reliability.md).
"""
