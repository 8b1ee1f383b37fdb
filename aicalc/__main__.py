from aicalc.cli import main

main()
