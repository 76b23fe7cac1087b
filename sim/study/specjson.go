package study

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/memreplay/memreplay/sim/trial"
)

// ParseSpec reads one trial's hyperparameters in the state file's spelling
// (SpecJSON), e.g. {"model": "bert-large", "batch": 16, "seq_len": 128,
// "precision": "fp16"}; absent fields take sim/trial's defaults. Unknown
// fields are errors, as in a space file: a misspelt "seqlen" silently
// dropped would predict a different trial. This is what `memreplay
// estimate --spec` and the Python gate send.
func ParseSpec(b []byte) (trial.Spec, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	var j SpecJSON
	if err := d.Decode(&j); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return trial.Spec{}, fmt.Errorf("at byte %d: %v", se.Offset, err)
		}
		return trial.Spec{}, err
	}
	if d.More() {
		return trial.Spec{}, fmt.Errorf("at byte %d: text after the object", d.InputOffset())
	}
	if j.Model.preset == "" && j.Model.custom == nil {
		return trial.Spec{}, errors.New(`"model" is required (a built-in name such as "bert-large", or a custom shape)`)
	}
	sp, err := j.Spec()
	if err != nil {
		return trial.Spec{}, err
	}
	return sp, sp.Validate()
}
