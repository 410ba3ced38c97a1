# python/examples/env.sh — sourced by each example's run.sh (after it sets `here`, its own
# folder): `repo` (the source tree) and PYTHONPATH for the package ($ASGDSIM_PYTHONPATH,
# else <repo>/build/python).
repo=$(cd "$here/../../.." && pwd)
PYTHONPATH=${ASGDSIM_PYTHONPATH:-$repo/build/python}${PYTHONPATH:+:$PYTHONPATH}
export PYTHONPATH
