module github.com/accord/accord/chaos/go

go 1.22

require github.com/accord/accord/bindings/go v0.0.0

replace github.com/accord/accord/bindings/go => ../../bindings/go
