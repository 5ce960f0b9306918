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
/* A connection libcurl opens but does not speak HTTP on (CURLOPT_CONNECT_ONLY): what its TLS context
   is set up with, through CURLOPT_SSL_CTX_FUNCTION and CURLOPT_SSL_CTX_DATA, and what the handshake
   leaves in it. OpenSSL is libcurl's TLS backend here; its functions are declared rather than
   included so that no OpenSSL type reaches Swift (an X509_STORE_CTX, an X509, a STACK_OF(X509)
   are void pointers; the ABI is the same). libcurl 7.88 gives no SSL * for a connect-only
   connection (CURLINFO_TLS_SSL_PTR's internals are NULL once the transfer is done), so what is
   needed of the handshake is recorded while it runs.

   offer_h2: ALPN "h2" then "http/1.1", with libcurl's own offer off (so that it installs no HTTP/2
   layer). A server without HTTP/2 then picks http/1.1 inside a handshake the client verifies,
   rather than refusing with an alert anyone on path can forge (F25 of redteam-4).
   keep_chain: the chain OpenSSL verified (leaf first, the trust anchor last) is kept, up-referenced,
   in `chain`: DNS stamps' certificate hashes are checked against it, not against what the server
   sent, to which it may append anything (F20). The verification itself is OpenSSL's own
   (X509_verify_cert with libcurl's store and parameters), called from the callback that records it.
   alpn: the protocol the server picked (TLS 1.2's ServerHello and TLS 1.3's EncryptedExtensions both
   come before the certificate is verified), copied when it fits (alpn_length 0 otherwise). */
typedef struct {
    int offer_h2;
    int keep_chain;
    void *chain;
    unsigned char alpn[32];
    unsigned int alpn_length;
} httpdns_tls_record;

long SSL_CTX_ctrl(void *ctx, int command, long larg, void *parg);
int SSL_CTX_set_alpn_protos(void *ctx, const unsigned char *protos, unsigned int protos_len);
void SSL_get0_alpn_selected(const void *ssl, const unsigned char **data, unsigned int *len);
void SSL_CTX_set_cert_verify_callback(void *ctx, int (*callback)(void *store, void *arg), void *arg);
int X509_verify_cert(void *store);
void *X509_STORE_CTX_get1_chain(const void *store);
void *X509_STORE_CTX_get_ex_data(const void *store, int index);
int SSL_get_ex_data_X509_STORE_CTX_idx(void);
int OPENSSL_sk_num(const void *stack);
void *OPENSSL_sk_value(const void *stack, int index);
void OPENSSL_sk_pop_free(void *stack, void (*free_function)(void *));
void X509_free(void *certificate);
/* DER of a certificate: with out NULL, only its length (< 0 on failure); else writes that many
   bytes at *out and moves *out past them. */
int i2d_X509(const void *certificate, unsigned char **out);
/* For the tests of the chain's bounds (CurlConnection.verifiedChain): a certificate from DER, and a
   stack of them as X509_STORE_CTX_get1_chain returns it. */
void *d2i_X509(void **out, const unsigned char **in, long length);
void *OPENSSL_sk_new_null(void);
int OPENSSL_sk_push(void *stack, const void *data);
int X509_up_ref(void *certificate);
/* 1 when the certificate's subjectAltName holds the IP address of chklen (4 or 16) bytes at chk
   (RFC 9462 §4.2: a designated resolver's certificate names the address that designated it). */
int X509_check_ip(void *certificate, const unsigned char *chk, size_t chklen, unsigned int flags);

static inline void httpdns_tls_record_clear(httpdns_tls_record *record) {
    if (record->chain) OPENSSL_sk_pop_free(record->chain, X509_free);
    record->chain = NULL;
    record->alpn_length = 0;
}

static inline int httpdns_verify_and_record(void *store, void *arg) {
    httpdns_tls_record *record = arg;
    int verified = X509_verify_cert(store);
    httpdns_tls_record_clear(record);
    if (verified > 0) {
        if (record->keep_chain) record->chain = X509_STORE_CTX_get1_chain(store);
        void *ssl = X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx());
        const unsigned char *alpn = NULL;
        unsigned int length = 0;
        if (ssl) SSL_get0_alpn_selected(ssl, &alpn, &length);
        if (alpn && length <= sizeof record->alpn) {
            for (unsigned int index = 0; index < length; index++) record->alpn[index] = alpn[index];
            record->alpn_length = length;
        }
    }
    return verified;
}

static inline CURLcode httpdns_set_up_tls_context(CURL *handle, void *ssl_ctx, void *userdata) {
    (void)handle;
    httpdns_tls_record *record = userdata;
    static const unsigned char protocols[] = {2, 'h', '2', 8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
    if (record->offer_h2 && SSL_CTX_set_alpn_protos(ssl_ctx, protocols, sizeof protocols) != 0) return CURLE_SSL_CONNECT_ERROR;
    SSL_CTX_set_cert_verify_callback(ssl_ctx, httpdns_verify_and_record, record);
    /* SSL_CTX_clear_mode(ssl_ctx, SSL_MODE_RELEASE_BUFFERS), a macro over SSL_CTX_ctrl: libcurl sets
       the mode, which frees OpenSSL's record buffers whenever a read or write empties them. On a
       connection that carries a pipeline of small messages that is a malloc and free of ~17 KiB per
       read and per write, which dominated the DoT worker's allocator time (BENCHMARKS.md, DoT). */
    SSL_CTX_ctrl(ssl_ctx, 78 /* SSL_CTRL_CLEAR_MODE */, 0x10L /* SSL_MODE_RELEASE_BUFFERS */, NULL);
    /* SSL_CTX_set_read_ahead(ssl_ctx, 1), a macro over SSL_CTX_ctrl: without it OpenSSL reads each
       record with two recv(2) calls (its 5-byte header, then its body), and a DoT server writes one
       record per answer: two system calls per answer. With it, one recv takes whatever has arrived.
       The bytes it reads ahead are invisible to poll(2): the owner reads until curl_easy_recv says
       CURLE_AGAIN before it polls, and reads once before its first poll (CurlConnection). */
    SSL_CTX_ctrl(ssl_ctx, 41 /* SSL_CTRL_SET_READ_AHEAD */, 1L, NULL);
    return CURLE_OK;
}

static inline CURLcode httpdns_easy_record_tls(CURL *handle, httpdns_tls_record *record) {
    CURLcode code = curl_easy_setopt(handle, CURLOPT_SSL_CTX_DATA, record);
    return code != CURLE_OK ? code : curl_easy_setopt(handle, CURLOPT_SSL_CTX_FUNCTION, httpdns_set_up_tls_context);
}

static inline CURLMcode httpdns_multi_setopt_long(CURLM *handle, CURLMoption option, long value) {
    return curl_multi_setopt(handle, option, value);
}
#endif
