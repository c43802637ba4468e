// A small JSON reader for tfxla kernel signatures (what Python's json.dumps writes).
// Header-only; part of the TfxlaLaunch op (tfxla_launch.cc).

#ifndef TFXLA_PLUGIN_OPS_JSON_READER_H_
#define TFXLA_PLUGIN_OPS_JSON_READER_H_

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace tfxla {

// A small JSON reader: enough for the signature json.dumps writes (objects, arrays, strings with
// escapes, integers, and for robustness floats, true/false/null).

struct Json {
  enum Kind { kNull, kBool, kNumber, kString, kArray, kObject } kind = kNull;
  bool boolean = false;
  bool is_integer = false;
  int64_t integer = 0;
  double number = 0;
  std::string str;
  std::vector<Json> array;
  std::vector<std::pair<std::string, Json>> object;

  const Json* Find(const std::string& key) const {
    for (const auto& kv : object)
      if (kv.first == key) return &kv.second;
    return nullptr;
  }
};

class JsonReader {
 public:
  explicit JsonReader(const char* text) : p_(text) {}

  bool Parse(Json* out, std::string* error) {
    if (!Value(out, 0)) {
      *error = error_;
      return false;
    }
    Space();
    if (*p_ != '\0') {
      *error = "trailing characters after the JSON value";
      return false;
    }
    return true;
  }

 private:
  bool Fail(const std::string& what) {
    error_ = what;
    return false;
  }
  void Space() {
    while (*p_ == ' ' || *p_ == '\n' || *p_ == '\t' || *p_ == '\r') ++p_;
  }
  bool Literal(const char* word) {
    size_t n = std::strlen(word);
    if (std::strncmp(p_, word, n) != 0) return false;
    p_ += n;
    return true;
  }

  bool Value(Json* out, int depth) {
    if (depth > 64) return Fail("JSON nested too deeply");
    Space();
    char c = *p_;
    if (c == '{') return Object(out, depth);
    if (c == '[') return Array(out, depth);
    if (c == '"') {
      out->kind = Json::kString;
      return String(&out->str);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return Number(out);
    if (Literal("true")) {
      out->kind = Json::kBool;
      out->boolean = true;
      return true;
    }
    if (Literal("false")) {
      out->kind = Json::kBool;
      return true;
    }
    if (Literal("null")) {
      out->kind = Json::kNull;
      return true;
    }
    return Fail(std::string("unexpected character '") + (c ? c : '?') + "'");
  }

  bool Object(Json* out, int depth) {
    out->kind = Json::kObject;
    ++p_;
    Space();
    if (*p_ == '}') {
      ++p_;
      return true;
    }
    for (;;) {
      Space();
      if (*p_ != '"') return Fail("expected a string key");
      std::string key;
      if (!String(&key)) return false;
      Space();
      if (*p_ != ':') return Fail("expected ':'");
      ++p_;
      Json value;
      if (!Value(&value, depth + 1)) return false;
      out->object.emplace_back(std::move(key), std::move(value));
      Space();
      if (*p_ == ',') {
        ++p_;
        continue;
      }
      if (*p_ == '}') {
        ++p_;
        return true;
      }
      return Fail("expected ',' or '}'");
    }
  }

  bool Array(Json* out, int depth) {
    out->kind = Json::kArray;
    ++p_;
    Space();
    if (*p_ == ']') {
      ++p_;
      return true;
    }
    for (;;) {
      Json value;
      if (!Value(&value, depth + 1)) return false;
      out->array.push_back(std::move(value));
      Space();
      if (*p_ == ',') {
        ++p_;
        continue;
      }
      if (*p_ == ']') {
        ++p_;
        return true;
      }
      return Fail("expected ',' or ']'");
    }
  }

  bool String(std::string* out) {
    ++p_;  // opening quote
    for (;;) {
      char c = *p_++;
      if (c == '\0') return Fail("unterminated string");
      if (c == '"') return true;
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      char e = *p_++;
      switch (e) {
        case '"':
          out->push_back('"');
          break;
        case '\\':
          out->push_back('\\');
          break;
        case '/':
          out->push_back('/');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          unsigned code = 0;
          for (int i = 0; i < 4; ++i) {
            char h = *p_++;
            code <<= 4;
            if (h >= '0' && h <= '9')
              code |= h - '0';
            else if (h >= 'a' && h <= 'f')
              code |= h - 'a' + 10;
            else if (h >= 'A' && h <= 'F')
              code |= h - 'A' + 10;
            else
              return Fail("bad \\u escape");
          }
          // Names are ASCII in practice; encode the BMP code point as UTF-8 (surrogates kept as is).
          if (code < 0x80) {
            out->push_back(static_cast<char>(code));
          } else if (code < 0x800) {
            out->push_back(static_cast<char>(0xC0 | (code >> 6)));
            out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
          } else {
            out->push_back(static_cast<char>(0xE0 | (code >> 12)));
            out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
            out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
          }
          break;
        }
        default:
          return Fail("bad escape in string");
      }
    }
  }

  bool Number(Json* out) {
    out->kind = Json::kNumber;
    const char* start = p_;
    bool integer = true;
    if (*p_ == '-') ++p_;
    while ((*p_ >= '0' && *p_ <= '9') || *p_ == '.' || *p_ == 'e' || *p_ == 'E' || *p_ == '+' || *p_ == '-') {
      if (*p_ == '.' || *p_ == 'e' || *p_ == 'E') integer = false;
      ++p_;
    }
    std::string text(start, p_);
    char* end = nullptr;
    errno = 0;
    if (integer) {
      out->integer = std::strtoll(text.c_str(), &end, 10);
      out->number = static_cast<double>(out->integer);
    } else {
      out->number = std::strtod(text.c_str(), &end);
      out->integer = static_cast<int64_t>(out->number);
    }
    if (end == text.c_str() || *end != '\0' || errno == ERANGE) return Fail("bad number " + text);
    out->is_integer = integer;
    return true;
  }

  const char* p_;
  std::string error_;
};

}  // namespace tfxla

#endif  // TFXLA_PLUGIN_OPS_JSON_READER_H_
