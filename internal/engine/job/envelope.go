package job

import "encoding/json"

// envelope is the payload a worker hands the coordinator: the result and
// the journal id its files were recorded under.
type envelope struct {
	Journal string          `json:"journal,omitempty"`
	Result  json.RawMessage `json:"result"`
}

// EncodeResult encodes an executed job and its journal id for the trip to
// the committer.
func EncodeResult(j Job, journalID string) ([]byte, error) {
	raw, err := json.Marshal(ResultOf(j))
	if err != nil {
		return nil, err
	}
	return json.Marshal(envelope{Journal: journalID, Result: raw})
}

// DecodeResult reads what EncodeResult wrote, or a bare Result (older
// nodes), returning the job and its journal id.
func DecodeResult(payload []byte) (Job, string, error) {
	var env envelope
	var r Result
	if err := json.Unmarshal(payload, &env); err == nil && len(env.Result) > 0 {
		if err := json.Unmarshal(env.Result, &r); err != nil {
			return nil, "", err
		}
		return r.Job(), env.Journal, nil
	}
	if err := json.Unmarshal(payload, &r); err != nil {
		return nil, "", err
	}
	return r.Job(), "", nil
}

// List converts a slice of one kind's outputs to jobs.
func List[J Job](outs []J) []Job {
	js := make([]Job, len(outs))
	for i, o := range outs {
		js[i] = o
	}
	return js
}

// Op returns the transaction a task's job is committed in (nil for an
// empty task).
func (t Task) Op() Op {
	switch t.Kind() {
	case KindRewrite, KindRemap:
		return RewriteTxn
	case KindRepack:
		return RepackTxn
	case KindCatchUp:
		return CatchUpTxn
	case KindSlice:
		return t.Slice.Parent().Op()
	case KindJoin:
		return t.Join.Parent().Op()
	}
	return nil
}
