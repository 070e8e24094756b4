"""``python -m peon.supervisor``: the supervisor process's entry, the only place that starts it.

Promise: running the package runs :func:`peon.supervisor.service.main` and nothing else; the session
(:class:`peon.Session`) starts it this way, so no other code imports the supervisor.
"""

from peon.supervisor.service import main

main()
