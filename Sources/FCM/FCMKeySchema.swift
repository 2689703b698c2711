import PushgateCore

/// The Firebase Admin SDK (Go) `messaging` structs gorush decodes FCM's pass-through objects into,
/// by their JSON names: a member whose key folds onto a field is renamed to the field's spelling.
public enum FCMKeySchema {
    public static let fcmOptions = KeySchema(["analytics_label"], protoNames: true)
    public static let notification = KeySchema(["title", "body", "image"])
    public static let lightSettings = KeySchema(["color", "light_on_duration", "light_off_duration"], protoNames: true)
    public static let androidNotification = KeySchema(
        [
            "title": nil, "body": nil, "icon": nil, "color": nil, "sound": nil, "tag": nil, "click_action": nil,
            "body_loc_key": nil, "body_loc_args": nil, "title_loc_key": nil, "title_loc_args": nil, "channel_id": nil,
            "image": nil, "ticker": nil, "sticky": nil, "event_time": nil, "local_only": nil, "notification_priority": nil,
            "vibrate_timings": nil, "default_vibrate_timings": nil, "default_sound": nil, "light_settings": lightSettings,
            "default_light_settings": nil, "visibility": nil, "notification_count": nil, "proxy": nil,
            "bypass_proxy_notification": nil,
        ], protoNames: true)
    public static let android = KeySchema(
        [
            "collapse_key": nil, "priority": nil, "ttl": nil, "restricted_package_name": nil, "data": nil,
            "notification": androidNotification, "fcm_options": fcmOptions, "direct_boot_ok": nil,
            "bandwidth_constrained_ok": nil, "restricted_satellite_ok": nil,
        ], protoNames: true)
    public static let webpushNotification = KeySchema([
        "actions", "title", "body", "icon", "badge", "dir", "data", "image", "lang", "renotify", "requireInteraction",
        "silent", "tag", "timestamp", "vibrate",
    ])
    public static let webpush = KeySchema(
        [
            "headers": nil, "data": nil, "notification": webpushNotification,
            "fcm_options": KeySchema(["link", "analytics_label"], protoNames: true),
        ], protoNames: true)
    public static let apsAlert = KeySchema([
        "title", "subtitle", "body", "loc-key", "loc-args", "title-loc-key", "title-loc-args", "subtitle-loc-key",
        "subtitle-loc-args", "action-loc-key", "launch-image",
    ])
    public static let aps = KeySchema([
        "alert": apsAlert, "badge": nil, "sound": KeySchema.sound, "content-available": nil, "mutable-content": nil,
        "category": nil, "thread-id": nil,
    ])
    public static let apns = KeySchema(
        [
            "headers": nil, "payload": KeySchema(["aps": aps]), "fcm_options": KeySchema(["analytics_label", "image"], protoNames: true),
            "live_activity_token": nil,
        ], protoNames: true)
}
