"""The exit statuses a worker process gives itself (a standby, a worker, the job host).

Promise: each names one way a worker ends on its own; the supervisor sees the number as the process's
``exitcode`` and reports it (:func:`peon.workers.reaper.describe_exitcode`). A worker retired by its
supervisor exits 0.
"""

EXIT_INTERNAL_ERROR = 70  # something in the worker itself failed (the job host could not leave a job's cgroup...)
EXIT_NOT_STARTED = 71  # the standby could not be prepared (an unarmed forkserver...), or serve what it was asked
EXIT_PARENT_GONE = 75  # its forkserver died (parent-death signal): it killed its tree and left
