"""Training in the gym (optional extra ``pip install -e ".[train]"``): trajectories → SFT data
(:mod:`ehrgym.train.data`), supervised fine-tuning (:mod:`ehrgym.train.sft`), reinforcement learning
with the episode as the environment and the verifier as the reward (:mod:`ehrgym.train.grpo`), and
small local models (:mod:`ehrgym.train.models`)."""
