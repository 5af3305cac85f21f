// Prints the size and field offsets of the V8 API structs that
// machsampler mirrors in src/v8/abi.rs, for the V8 headers it is compiled
// against (one Node major's include/node). It only uses sizeof/offsetof, so
// it links against nothing from V8.
//
//   g++ -std=c++20 -I .cache/node/<major>/include/node probe.cc -o probe
//
// Output: one `name value` pair a line; src/v8/abi.rs's layout test parses
// it and compares each value with the Rust mirror for that version.
#include <cstddef>
#include <cstdio>

#include <v8-callbacks.h>
#include <v8-unwinder.h>
#include <v8-version.h>

#define SIZE(T) std::printf("sizeof.%s %zu\n", #T, sizeof(v8::T))
#define ALIGN(T) std::printf("alignof.%s %zu\n", #T, alignof(v8::T))
#define OFF(T, f) std::printf("offsetof.%s.%s %zu\n", #T, #f, offsetof(v8::T, f))

int main() {
  std::printf("version %d.%d\n", V8_MAJOR_VERSION, V8_MINOR_VERSION);

  SIZE(RegisterState);
  ALIGN(RegisterState);
  OFF(RegisterState, pc);
  OFF(RegisterState, sp);
  OFF(RegisterState, fp);
  OFF(RegisterState, lr);
  OFF(RegisterState, callee_saved);

  SIZE(SampleInfo);
  ALIGN(SampleInfo);
  OFF(SampleInfo, frames_count);
  OFF(SampleInfo, external_callback_entry);
  OFF(SampleInfo, context);
  OFF(SampleInfo, embedder_context);
  OFF(SampleInfo, vm_state);
  OFF(SampleInfo, embedder_state);
  std::printf("sizeof.StateTag %zu\n", sizeof(v8::StateTag));
  std::printf("sizeof.EmbedderStateTag %zu\n", sizeof(v8::EmbedderStateTag));
  std::printf("enum.StateTag.GC %d\n", static_cast<int>(v8::GC));
  std::printf("enum.StateTag.EXTERNAL %d\n", static_cast<int>(v8::EXTERNAL));
  std::printf("enum.StateTag.IDLE %d\n", static_cast<int>(v8::IDLE));

  SIZE(JitCodeEvent);
  ALIGN(JitCodeEvent);
  OFF(JitCodeEvent, type);
  OFF(JitCodeEvent, code_type);
  OFF(JitCodeEvent, code_start);
  OFF(JitCodeEvent, code_len);
  OFF(JitCodeEvent, script);
  OFF(JitCodeEvent, user_data);
  OFF(JitCodeEvent, wasm_source_info);
  OFF(JitCodeEvent, name);
  OFF(JitCodeEvent, line_info);
  OFF(JitCodeEvent, new_code_start);
  OFF(JitCodeEvent, isolate);
  std::printf("offsetof.JitCodeEvent.name.str %zu\n", offsetof(v8::JitCodeEvent, name) + offsetof(v8::JitCodeEvent::name_t, str));
  std::printf("offsetof.JitCodeEvent.name.len %zu\n", offsetof(v8::JitCodeEvent, name) + offsetof(v8::JitCodeEvent::name_t, len));
  std::printf("sizeof.JitCodeEvent.EventType %zu\n", sizeof(v8::JitCodeEvent::EventType));
  std::printf("sizeof.JitCodeEvent.CodeType %zu\n", sizeof(v8::JitCodeEvent::CodeType));
  std::printf("enum.JitCodeEvent.CODE_ADDED %d\n", static_cast<int>(v8::JitCodeEvent::CODE_ADDED));
  std::printf("enum.JitCodeEvent.CODE_MOVED %d\n", static_cast<int>(v8::JitCodeEvent::CODE_MOVED));
  std::printf("enum.JitCodeEvent.CODE_REMOVED %d\n", static_cast<int>(v8::JitCodeEvent::CODE_REMOVED));
  std::printf("enum.JitCodeEvent.BYTE_CODE %d\n", static_cast<int>(v8::JitCodeEvent::BYTE_CODE));
  std::printf("enum.JitCodeEvent.JIT_CODE %d\n", static_cast<int>(v8::JitCodeEvent::JIT_CODE));
  std::printf("enum.JitCodeEvent.WASM_CODE %d\n", static_cast<int>(v8::JitCodeEvent::WASM_CODE));
  std::printf("enum.kJitCodeEventEnumExisting %d\n", static_cast<int>(v8::kJitCodeEventEnumExisting));
  return 0;
}
