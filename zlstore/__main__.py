"""`python -m zlstore`: the zlstore command line."""

from .cli import cli

if __name__ == "__main__":
    cli(prog_name="zlstore")
