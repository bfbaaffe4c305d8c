package server

import (
	"errors"
	"net/url"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/gpubill/gpubill/pkg/apperr"
	ledgerv1 "github.com/gpubill/gpubill/proto/gen/gpubill/ledger/v1"
	payoutv1 "github.com/gpubill/gpubill/proto/gen/gpubill/payout/v1"
)

// TestFileUploadDecodesAsTheJSONForm: a raw upload fills its request as
// the JSON form did (query fields by either name, the file as content,
// format dropped where the request has none), and a field given by its
// two names is a 400 naming the parameter (the JSON form's protojson
// refused the duplicate too).
func TestFileUploadDecodesAsTheJSONForm(t *testing.T) {
	const file = "date,reference,amount,balance\n2026-11-30,po-1,-1.00,9.00\n"
	stmt := (&ledgerv1.ImportBankStatementRequest{}).ProtoReflect().Descriptor()
	form, err := uploadForm(stmt, url.Values{"statementId": {"st-1"}, "currency": {"CNY"}})
	if err != nil {
		t.Fatal(err)
	}
	form["format"] = "csv"
	var got ledgerv1.ImportBankStatementRequest
	if err := (&fileUpload{form: form, file: []byte(file)}).decode(&got); err != nil {
		t.Fatal(err)
	}
	want := &ledgerv1.ImportBankStatementRequest{StatementId: "st-1", Currency: "CNY", Format: "csv", Content: file}
	if !proto.Equal(&got, want) {
		t.Errorf("decoded %v, want %v", &got, want)
	}

	bankFile := (&payoutv1.ImportBankFileRequest{}).ProtoReflect().Descriptor()
	form, err = uploadForm(bankFile, url.Values{"name": {"a.xml"}})
	if err != nil {
		t.Fatal(err)
	}
	form["format"] = "camt053"
	var bf payoutv1.ImportBankFileRequest
	if err := (&fileUpload{form: form, file: []byte("<x/>")}).decode(&bf); err != nil || bf.GetName() != "a.xml" || bf.GetContent() != "<x/>" {
		t.Errorf("bank file: %v, %v", &bf, err)
	}

	_, err = uploadForm(stmt, url.Values{"statement_id": {"st-1"}, "statementId": {"st-2"}})
	if inv := (*apperr.InvalidError)(nil); !errors.As(err, &inv) || inv.Violations[0].Field != "statement_id" {
		t.Errorf("a field by its two names: %v; want invalid, naming statement_id (the later of the two, sorted)", err)
	}
}
