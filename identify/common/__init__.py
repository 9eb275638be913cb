"""Small helpers every stage uses, below all of them: JSON/YAML conversion of numpy data
(:mod:`.jsonutil`), atomic file writes (:mod:`.fileio`), progress bars and console messages
(:mod:`.progress`), and the error types the CLI maps to exit codes (:mod:`.errors`); writability,
free-space and file-kind probes and the cache folder (:mod:`.fileio`), fast small figures
(:mod:`.figures`), pybullet imported without its banner (:mod:`.banner`), BLAS threading (:mod:`.blas`),
the estimator contract of identify.estimation's fitters (:mod:`.estimator`: get_params /
set_params / repr, clone, the fitted check).

May import: the standard library, numpy, yaml, tqdm (matplotlib and PIL lazily, in figures). Must not import any other ``identify``
package, ``twin`` or ``robot``."""
