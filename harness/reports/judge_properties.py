"""The user properties a chaos test's report carries about its judges: written by the ``chaos``
fixture, read by the terminal summary, the HTML report and JUnit (and carried by pytest-xdist).
"""

from __future__ import annotations

#: The judges that ran (", "-joined), and of them those that found a violation.
JUDGED = "chaos_judged"
JUDGES_FAILED = "chaos_judges_failed"
#: The judges that could not judge: their names, and "name: why; name: why".
NOT_JUDGED_NAMES = "chaos_not_judged_names"
NOT_JUDGED = "chaos_not_judged"
#: Set when a judge raised (a bug in pathways-chaos): the test is an ERROR, not a failure.
JUDGE_ERROR = "chaos_judge_error"
