"""Verbs over finished folders: check, compare (and the CI gate), cost, MLPerf submission, and RunData, the folder read once for them and the renderers."""
