module github.com/corvohq/corvo/sdk/go

go 1.26
