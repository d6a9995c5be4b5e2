"""`python -m npmpi map`: the cluster map's options, roles, schedules, pairs, recording, confirmation
and the statistic of its slow links (shared with the analysis)."""
