module distkit.dev/examples/train

go 1.19

require distkit.dev/distkit v0.0.0

replace distkit.dev/distkit => ../../bindings/go
