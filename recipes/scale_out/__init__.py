"""The scale-out configs (FSDP / DeepSpeed / accelerate files), shipped inside the package as
`hf_ot.scale_out_configs`: `hf_ot.scale_out.config_file("ds_zero2.json")` gives a file's path from any folder."""
