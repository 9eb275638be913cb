"""The identified model at work: torque feed-forward (``feedforward``), the generalized-momentum
collision observer (``observer``), closed-loop tracking and collision runs (``closed_loop``,
``collision``) and the model they use (``joint_model``). See docs/closed_loop.md."""
