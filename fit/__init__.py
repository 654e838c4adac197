"""``r2a fit``: R2A's parts for a base policy nobody here wrote — graph, retriever, gate (with its DAgger rounds),
image and harmonization statistics and a ready R2A config — made by one resumable command (:mod:`fit.pipeline`)."""
