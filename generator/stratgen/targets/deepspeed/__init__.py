"""The deepspeed target: a DeepSpeed accelerator for each device of the specs
(``accelerators``)."""
