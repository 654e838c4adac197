"""The built-in vision-language-action policy: model, training, checkpoints and the frozen policy object."""
