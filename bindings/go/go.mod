module github.com/accord/accord/bindings/go

go 1.22
