"""Command-line entry points: thin layers that parse options, call the stage
functions and print."""
