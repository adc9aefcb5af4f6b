//go:build !amd64

package vector

// distancesSIMD: no vector kernels on this architecture (the plain Go
// kernels are used).
func distancesSIMD(set, v, out []float32, dot bool) bool { return false }

func columnDistancesSIMD(cols, v, out []float32, dot bool) bool { return false }
