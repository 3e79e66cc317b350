"""The command line: `dspark-lab` (main.py: the parser, sweep, report, main), its options generated
from LabConfig's fields (options.py) and grid lists (lists.py), `doctor` (doctor.py), `ep` (ep.py),
the text summary of recorded runs (summary.py), and the JupyterLab launcher behind `bash lab.sh`
(launch.py). Ctrl-C while the command starts is answered by dspark_lab/startup.py, installed by the
package's __init__ before anything else is imported."""
