from berth_cli.main import cli

cli(prog_name="berth")
