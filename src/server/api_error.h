// server/api_error: an error answered to a client, in OpenAI's shape
// {"error": {"message", "type", "param", "code"}}, with its HTTP status. Everything that
// rejects a request throws one of these; the routes turn it into the response.
#pragma once
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>

namespace sluice::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string code = {})
      : std::runtime_error(message), status_(status), param_(std::move(param)), code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  // OpenAI's type names by status: invalid_request_error (400, 404, 413), authentication_error
  // (401), server_error (5xx).
  std::string type() const;
  nlohmann::json to_json() const;

 private:
  int status_;
  std::string param_, code_;
};

// A 400 naming the field: "'max_tokens' must be an integer >= 1".
[[noreturn]] inline void bad_field(const std::string& field, const std::string& why) {
  throw ApiError(400, "'" + field + "' " + why, field);
}

}  // namespace sluice::server
