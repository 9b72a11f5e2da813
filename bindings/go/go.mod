module distkit.dev/distkit

go 1.19
