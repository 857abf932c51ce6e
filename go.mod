module github.com/junctionmq/junction

go 1.26

require (
	github.com/go-stomp/stomp/v3 v3.1.3
	github.com/rs/zerolog v1.35.1
	golang.org/x/sys v0.29.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/mattn/go-colorable v0.1.14 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
)
