"""One module per `realm` command: `add_parser(commands)` declares its flags, `handle(args)` runs it."""
