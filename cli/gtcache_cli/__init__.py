"""The ``gtcache`` command-line tool (click); it only renders what the library returns."""
