package codec

// RLERuns counts the runs of equal width-byte values in data (runs longer
// than 255 count once per 255 values, as they are stored).
func RLERuns(data []byte, width int) int {
	n := len(data) / width
	if n == 0 {
		return 0
	}
	runs, cur := 1, 1
	for i := 1; i < n; i++ {
		if string(data[i*width:(i+1)*width]) == string(data[(i-1)*width:i*width]) && cur < 255 {
			cur++
			continue
		}
		runs++
		cur = 1
	}
	return runs
}

// AppendRLE encodes width-byte values as lance's mini-block Rle: the run
// values (raw, width bytes each) appended to vals, the u8 run lengths
// (runs over 255 split) appended to lens.
func AppendRLE(vals, lens, data []byte, width int) ([]byte, []byte) {
	n := len(data) / width
	for i := 0; i < n; {
		v := data[i*width : (i+1)*width]
		j := i + 1
		for j < n && j-i < 255 && string(data[j*width:(j+1)*width]) == string(v) {
			j++
		}
		vals = append(vals, v...)
		lens = append(lens, byte(j-i))
		i = j
	}
	return vals, lens
}
