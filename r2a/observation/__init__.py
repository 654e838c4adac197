"""What the base policy sees, made to look like its training data: policies that wrap a policy and change only its
observations, composed by the R2A wrapper (``r2a/wrapper/build.py``) or used alone.

* :mod:`r2a.observation.harmonize` — photometric harmonization of camera images toward the demonstrations',
  gated by a visual-OOD detector (``harmonize:BASE``);
* :mod:`r2a.observation.canonicalize` — view canonicalization: a moved third-person camera's image warped back to
  the training view (``canonicalize:BASE``).
"""
