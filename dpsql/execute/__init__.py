"""Running a plan: the exact-result layout (:mod:`.layout`) and post-processing over noisy
values (:mod:`.post`)."""
