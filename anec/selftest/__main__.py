"""``python -m anec.selftest``: run the self-test (see :mod:`anec.selftest`)."""

from anec.selftest.runner import main

main()
