"""The ``hpbroker`` command: sub-commands registered from small modules."""

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="hpbroker", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
