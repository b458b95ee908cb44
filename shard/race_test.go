//go:build race

package shard

const raceOn = true
