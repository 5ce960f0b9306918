#ifndef SWIFT_HTTPDNS_CCURL_SHIM_H
#define SWIFT_HTTPDNS_CCURL_SHIM_H
// Only static inline wrappers for libcurl's variadic calls live here (Swift cannot call C varargs),
// and the one TLS-context callback that sets ALPN for a connection libcurl only opens.
#include <curl/curl.h>

static inline CURLcode httpdns_easy_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode httpdns_easy_setopt_off(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode httpdns_easy_setopt_string(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode httpdns_easy_setopt_pointer(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode httpdns_easy_setopt_slist(CURL *handle, CURLoption option, struct curl_slist *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode httpdns_easy_setopt_blob(CURL *handle, CURLoption option, struct curl_blob *value) {
    return curl_easy_setopt(handle, option, value);
}
static inline CURLcode httpdns_easy_setopt_write_callback(CURL *handle, CURLoption option,
                                                          size_t (*callback)(char *, size_t, size_t, void *)) {
    return curl_easy_setopt(handle, option, callback);
}
static inline CURLcode httpdns_easy_setopt_seek_callback(CURL *handle,
        int (*callback)(void *, curl_off_t, int)) {
    return curl_easy_setopt(handle, CURLOPT_SEEKFUNCTION, callback);
}
static inline CURLcode httpdns_easy_setopt_resolver_start(CURL *handle, int (*callback)(void *, void *, void *)) {
    return curl_easy_setopt(handle, CURLOPT_RESOLVER_START_FUNCTION, callback);
}
/* CURLPAUSE_CONT is a compound macro Swift does not import. */
static inline CURLcode httpdns_easy_unpause(CURL *handle) {
    return curl_easy_pause(handle, CURLPAUSE_CONT);
}
static inline CURLcode httpdns_easy_setopt_xferinfo_callback(CURL *handle,
        int (*callback)(void *, curl_off_t, curl_off_t, curl_off_t, curl_off_t)) {
    return curl_easy_setopt(handle, CURLOPT_XFERINFOFUNCTION, callback);
}
static inline CURLcode httpdns_easy_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}
static inline CURLcode httpdns_easy_getinfo_double(CURL *handle, CURLINFO info, double *value) {
    return curl_easy_getinfo(handle, info, value);
}
static inline CURLcode httpdns_easy_getinfo_off(CURL *handle, CURLINFO info, curl_off_t *value) {
    return curl_easy_getinfo(handle, info, value);
}
static inline CURLcode httpdns_easy_getinfo_string(CURL *handle, CURLINFO info, char **value) {
    return curl_easy_getinfo(handle, info, value);
}
static inline CURLcode httpdns_easy_getinfo_pointer(CURL *handle, CURLINFO info, void **value) {
    return curl_easy_getinfo(handle, info, value);
}
static inline CURLcode httpdns_easy_getinfo_socket(CURL *handle, CURLINFO info, curl_socket_t *value) {
    return curl_easy_getinfo(handle, info, value);
}
/* ALPN "h2", then "http/1.1", set on the TLS context before the handshake, for a connection libcurl
   opens but does not speak HTTP on (CURLOPT_CONNECT_ONLY with CURLOPT_SSL_ENABLE_ALPN off, so libcurl
   neither offers its own list nor installs its HTTP/2 layer). A server without HTTP/2 then picks
   http/1.1 inside a handshake the client verified, rather than refusing with an alert anyone on path
   can forge (F25 of redteam-4). OpenSSL is libcurl's TLS backend here; the functions are declared
   rather than included so that no OpenSSL type reaches Swift. */
int SSL_CTX_set_alpn_protos(void *ctx, const unsigned char *protos, unsigned int protos_len);
void SSL_get0_alpn_selected(const void *ssl, const unsigned char **data, unsigned int *len);
static inline CURLcode httpdns_offer_h2_then_http11(CURL *handle, void *ssl_ctx, void *userdata) {
    (void)handle;
    (void)userdata;
    static const unsigned char protocols[] = {2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    return SSL_CTX_set_alpn_protos(ssl_ctx, protocols, sizeof protocols) == 0 ? CURLE_OK : CURLE_SSL_CONNECT_ERROR;
}
static inline CURLcode httpdns_easy_offer_h2_then_http11(CURL *handle) {
    return curl_easy_setopt(handle, CURLOPT_SSL_CTX_FUNCTION, httpdns_offer_h2_then_http11);
}
/* The chain OpenSSL built and verified for a connection (leaf first, the trust anchor last), read
   from the SSL object libcurl hands out (CURLINFO_TLS_SSL_PTR), for DNS stamps' certificate hashes:
   what the server merely sent may hold any certificate it appends. Declared, as above, so that no
   OpenSSL type reaches Swift: SSL_get0_verified_chain returns a STACK_OF(X509). */
void *SSL_get0_verified_chain(const void *ssl);
int OPENSSL_sk_num(const void *stack);
void *OPENSSL_sk_value(const void *stack, int index);
/* DER of a certificate: with out NULL, only its length (< 0 on failure); else writes that many
   bytes at *out and moves *out past them. */
int i2d_X509(const void *certificate, unsigned char **out);
static inline CURLMcode httpdns_multi_setopt_long(CURLM *handle, CURLMoption option, long value) {
    return curl_multi_setopt(handle, option, value);
}
#endif
