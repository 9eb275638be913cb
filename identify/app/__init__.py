"""The application: scenario files, the pipeline that runs the stages in order, the run's typed
results and their rendering (metrics.json, parameters.yaml, report), log import, sweeps and the
``twinid`` command line.

May import every other ``identify`` package. Must not import ``twin`` or ``robot`` (backends are
looked up by name through :func:`identify.backend.load_backend`)."""
