"""The identified model at work: torque feed-forward (``feedforward``), the generalized-momentum
collision observer (``observer``) and collision detection from its residual (``detection``),
thresholds that transfer from one trajectory to another, at rest too (``transfer``),
closed-loop tracking (``closed_loop``), the payload identification run (``payload_run``), the
controller's model (``joint_model``) and the runs a scenario's ``closed_loop:`` / ``payload:``
sections ask for, as functions over plain inputs (``runs``). See docs/closed_loop.md."""
