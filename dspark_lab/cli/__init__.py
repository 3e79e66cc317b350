"""The command line: `dspark-lab` (main.py), its `ep` subcommand (ep.py), and the JupyterLab
launcher behind `bash lab.sh` (launch.py)."""
