"""The built-in vision-language-action policy at run time: the network, its checkpoint and the frozen policy object
(its training: ``training/vla/``)."""
