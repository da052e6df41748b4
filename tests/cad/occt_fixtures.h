// Helpers shared by the CAD tests that build their fixtures with OCCT itself.
#pragma once

#include <Message.hxx>
#include <Message_Messenger.hxx>
#include <Message_SequenceOfPrinters.hxx>
#include <Standard_Handle.hxx>

namespace clash::cad::testing {

/// Detaches OCCT's default messenger printers (the writers print to stdout) for one scope.
class QuietOcct {
 public:
  QuietOcct() : messenger_(Message::DefaultMessenger()) {
    saved_ = messenger_->Printers();
    messenger_->ChangePrinters().Clear();
  }
  ~QuietOcct() { messenger_->ChangePrinters() = saved_; }
  QuietOcct(const QuietOcct&) = delete;
  QuietOcct& operator=(const QuietOcct&) = delete;

 private:
  Handle(Message_Messenger) messenger_;
  Message_SequenceOfPrinters saved_;
};

}  // namespace clash::cad::testing
