from gtcache_cli.main import main

main()
