from gtcache_cli import run

run()
