"""The ``gtcache`` command-line tool (click); it only renders what the library returns."""


def run() -> None:
    """Console-script entry point. Ctrl-C while the command's modules load (some 0.4 s: click,
    rich, gtcache) is ``Error: Interrupted.`` and exit 130 too, as it is later
    (``_errors.guarded``), not a traceback."""
    try:
        from gtcache_cli.main import main
    except KeyboardInterrupt:
        import sys

        sys.stderr.write("Error: Interrupted.\n")
        raise SystemExit(130) from None
    main()
